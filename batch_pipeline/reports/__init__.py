"""How reports read on a terminal (`text`): escaped names, tables, doctor lines. Each product
writes its own status and doctor reports in its folder (`index/report.py`,
`tickets/report.py`, `briefs/report.py`); each report is a dict (its `--json` form) with the
product's `product` name and `kind`."""

"""A fourth product, written as docs/layout.md's "Adding a product" says, in this folder alone:
each document of a collection put in a size bucket (`<collection>_lengths`).

It touches no other folder: a configuration declares it (`products: lengths: {declaration:
tests.lengths.kind:LENGTHS, ...}`), and the commands that cover every product, `run --kind`,
the code location and the frame's policies (the mass-deletion guard, `every_run`, the nightly
review, retention) then cover it. `test_lengths_product.py` shows each.
"""

"""How a collection is doing: completeness, freshness (lag) and the status and doctor
reports."""

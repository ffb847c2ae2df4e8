"""The live traffic window: prefix overlap, shape, band changes, the status page."""

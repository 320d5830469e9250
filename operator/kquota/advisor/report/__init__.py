"""The advisor's report: the result tables as data (JSON, Parquet) and as an HTML page with plots."""

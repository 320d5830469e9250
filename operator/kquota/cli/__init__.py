"""The kquota command line: plan, explain, export, validate, operator."""

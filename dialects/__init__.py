"""Dialects of astra-compile: one file per dialect (IRDL definition + thin builders and accessors)."""

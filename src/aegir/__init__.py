"""Aegir: a byte-level hierarchical model that annotates table columns (SOTAB V2 CTA + CPA)."""

__version__ = "0.1.0"

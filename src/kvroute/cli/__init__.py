"""Thin command-line shell: parse, call the library, render. Errors become one line and an exit code here."""

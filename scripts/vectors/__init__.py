"""Independent reference implementations of the rules in spec/*.md, one module per vector family,
and the checks that re-derive the expected values of spec/vectors/*.json (scripts/check_vectors.py
drives them). Standard library only."""

"""The layer ops, one module each; registry.py finds them (modules starting with _ are
helpers shared by a family of ops, not ops)."""

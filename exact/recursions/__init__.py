"""Exact laws and expectations by recursion instead of enumeration: token verification's dynamic programme,
Traversal and Layer Verification's recursions, and the papers' closed forms."""

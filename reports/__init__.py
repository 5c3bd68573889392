"""Rendering results.json into the verification report."""

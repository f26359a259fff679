"""Oracles: float64 (torch) and mpmath implementations that follow each recurrence literally.

This package depends on nothing else in the project.
"""

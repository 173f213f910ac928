"""Types that cross from workflows to activities and clients. ``search`` imports
temporalio, so import it by name; ``failures`` is the failure model.
"""

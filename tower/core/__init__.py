"""The pure core of the engine: state, reducers, graph, one step, the transition log.

Nothing here imports temporalio (tests/unit/test_layers.py keeps it so).
"""

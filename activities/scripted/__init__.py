"""The example agents' scripts for the offline scripted model: one module per agent, each a
``SCRIPTS`` mapping its nodes to pure functions of the request (tower.activities.scripted)."""

"""Types that cross from workflows to activities and clients.

``wire`` (model and tool calls, messages) and ``decisions`` (approval decisions and
gate records) are pure pydantic; ``search`` (search attribute keys) imports temporalio, so
import it by name: ``from tower.contract import search``. ``failures`` is the failure
model: ``Code``, the root ``TowerError`` and the registry that carries them across.
"""

"""What a project's own tests use to exercise Tower for real.

``tower.testing.model_server.LoopbackModelServer``: an OpenAI-compatible server on
127.0.0.1 that answers with your scripted replies and injects faults on demand (429,
500, slow replies, malformed JSON, schema-violating output, unknown tools), so the real
``openai`` SDK path of your agents is tested over real HTTP.
"""

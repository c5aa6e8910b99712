"""``python -m alternet.shards SRC OUT``: an image folder as LitData shards for streaming training (the command
lives in :mod:`alternet.apps.shards`, the format in :mod:`alternet.data.shards`)."""

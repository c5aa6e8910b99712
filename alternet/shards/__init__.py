"""``alternet shards SRC OUT``: an image folder as LitData shards for streaming training. The command line is
:mod:`alternet.shards.cli` (``python -m alternet.shards`` runs it too); the format is
:mod:`alternet.data.files.shards`."""

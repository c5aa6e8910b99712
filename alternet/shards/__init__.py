"""``alternet shards SRC OUT``: an image folder as LitData shards for streaming training. The command line is
:mod:`alternet.shards.cli`; the format is
:mod:`alternet.data.files.shards`."""

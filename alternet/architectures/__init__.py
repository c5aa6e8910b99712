"""What each named model is, as data: stage layouts, the families' specs and their rules, the zoo's names, and each
family's config section, derived from its spec. Nothing here imports torch, so the config schema and the commands'
``--help`` read the same tables that :mod:`alternet.models` builds from."""

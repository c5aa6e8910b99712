"""Where alternet plugs into Hydra: the callbacks its configs name (:class:`~.sweep.SweepSummary` at a multirun's
end, :class:`~.preflight.SweepPreflight` before a sweep's first job, the run-directory pre-flights), and the one-line
words for Hydra's composition errors (:mod:`.composition`). The schemas and the resolver are registered by
:mod:`alternet.apps.config`, where the commands compose."""

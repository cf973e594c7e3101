"""The [LWTM26] high-dimensional GD study: the design of its grid (:mod:`.design`), the
experiment that runs GD to its limit against the minimum-norm solution (:mod:`.experiment`)
and its HDF5 and figure outputs (:mod:`.output`). ``meanfield highdim`` is the command line."""

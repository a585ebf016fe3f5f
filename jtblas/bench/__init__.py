"""`jtblas bench`: GPU benchmarks of jtblas against XLA, cuBLAS, an exhaustive oracle and peers.

Modules: `shapes` (the CSV shape sets), `timing` (device-time measurement), `contenders` (how each
contender launches), `oracle` (parallel compilation and the cached exhaustive search), `report`
(table, summary and plots from the results JSON; runs on any machine) and `cli` (`main(argv)`).
Nothing here is imported by `import jtblas`.
"""

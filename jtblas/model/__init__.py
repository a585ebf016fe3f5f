"""The analytical model: `Problem` + `Hardware` → feasible `Config`s → predicted time → the winner.

Modules, one job each: `resources` (shared memory, registers, occupancy, instruction layout),
`candidates` (the search space and its feasibility rules), `cost` (the equations, in one place),
`select` (argmin, cache), `repack` (whether copying misaligned operands into padded buffers
pays; the top of the plan), `explain` (the ranking in words). Python and NumPy (every candidate
is ranked at once, as arrays): imports neither JAX nor Triton and queries no device, so it runs
and is tested on any machine with any hardware description.
"""

from jtblas.constants import Constants
from jtblas.model.candidates import candidates_for_problem, rejection_reasons
from jtblas.model.cost import Estimate, estimate
from jtblas.model.explain import Explanation, explain_problem
from jtblas.model.repack import ProductPlan, clear_cache, plan_for_problem
from jtblas.model.select import select_for_problem

__all__ = [
    "Constants",
    "Estimate",
    "Explanation",
    "ProductPlan",
    "candidates_for_problem",
    "clear_cache",
    "estimate",
    "explain_problem",
    "plan_for_problem",
    "rejection_reasons",
    "select_for_problem",
]

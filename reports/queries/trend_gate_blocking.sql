-- trend: gate_blocking
-- title: mapped boundaries keeping the bitwise gate from passing (failing + not compared; 0 = pass)
-- unit: boundaries
-- worse: higher
-- grain: one value per run gated by tilake dumps gate (fct_dump_gates)
select g.run_id, g.boundaries_blocking as value
from fct_dump_gates g

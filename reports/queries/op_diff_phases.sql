-- kernel calls per side × phase × how the phase is known × pass, summed over ranks
select side, phase, phase_source, pass, sum(calls) as calls, sum(dur_ns) as dur_ns, count(distinct rank) as ranks,
       min(example_mark) as example_mark, bool_or(compared) as compared
from fct_run_phases where run_id = $run_id
group by all
order by side desc, phase nulls last, phase_source, pass nulls last

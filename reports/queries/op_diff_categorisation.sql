-- per side: kernel calls by where their category comes from (op_catalog, fallback, none)
select * from fct_side_categorisation where run_id = $run_id order by side desc

-- Aligned groups of the layers a report shows side by side: the first layer and every layer whose
-- alignment differs from most layers' (fct_kernel_alignment). Parameters: $run_id
select layer, position, relation, confidence, evidence, fused_side, module, module_label_en, module_label_zh,
       comparison_grade, comparison_grade_emoji, train_first, train_last, infer_first, infer_last,
       train_kernels, infer_kernels, train_shapes, infer_shapes, odd_layer, odd_reason, phase_pair
from main.fct_kernel_alignment
where run_id = $run_id
  and (layer = (select min(a.layer) from main.fct_kernel_alignment as a where a.run_id = $run_id) or odd_layer)
order by layer, position

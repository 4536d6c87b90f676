"""Op-type catalog and call-stack frames for the synthetic captures (data only).

:data:`CATALOG` maps a CANN op type to how it is launched on Ascend: kernel name in the real conventions
(reference doc §5.1: ``aclnn<Api>_<Impl>_<OpType>``, ``trans_TransData_<n>``, ``hcom_<coll>__<id>_<i>_1``,
ATB ``…NdKernel``, Triton ``_triton_rope``), accelerator (``COMPUTE_TASK_INFO.taskType``), the ACL-level
framework record torch_npu links the kernel to, its enclosing ``aten::``/``npu::`` record, a plausible
duration (ns, Ascend 910B scale, not measured) and block dims. Names taken from real files are
``aclnnMm_MatMulCommon_MatMulV2``, ``aclnnMatmul_MatMulV3Common_MatMulV5`` (opType MatMulV3),
``aclnnAdd_AddAiCore_Add``, ``aclnnCast_CastAiCore_Cast``, ``aclnnMuls_MulAiCore_Mul``,
``aclnnReduceSum_ReduceSumOpAiCore_ReduceSum``, ``aclnnLogSoftmax_LogSoftmaxAiCore_LogSoftmaxV2``,
``aclnnLogSoftmaxBackward_LogSoftmaxGrad_LogSoftmaxGrad``, ``aclnnFlashAttentionScore[Grad]_…`` (fixtures);
the others follow the same pattern. Frames mimic torch_npu's ``path.py(line): func`` strings for the
source paths named in the seed's §4.4 table (line numbers illustrative).
Callers may add entries (another backend, another vllm-ascend version) before building populations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional


@dataclass
class KernelTemplate:
    """How one op type is launched: kernel name, accelerator, host records, typical duration."""
    kernel: str
    accelerator: str
    acl: str
    parent: Optional[str]
    dur_ns: int
    block_dim: int
    mix_block_dim: int = 0
    formats: str = "FORMAT_ND"
    op_type: Optional[str] = None   # when the catalog key is not the op type (``Muls`` launches ``Mul``)


def _t(kernel, acc, acl, parent, dur, bd, mix=0, fmt="FORMAT_ND", op_type=None):
    return KernelTemplate(kernel, acc, acl, parent, dur, bd, mix, fmt, op_type)


#: op type → launch template. Callers add entries to model other backends/versions.
CATALOG: Dict[str, KernelTemplate] = {
    "FlashAttentionScore": _t("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore", "MIX_AIC",
                              "aclnnFlashAttentionScore", "npu::npu_fusion_attention", 182_000, 24, 48),
    "FlashAttentionScoreGrad": _t("aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad_FlashAttentionScoreGrad",
                                  "MIX_AIC", "aclnnFlashAttentionScoreGrad", "npu::npu_fusion_attention_grad",
                                  410_000, 24, 48),
    "FusedInferAttentionScore": _t("aclnnFusedInferAttentionScoreV3_FusedInferAttentionScore_FusedInferAttentionScore",
                                   "MIX_AIC", "aclnnFusedInferAttentionScoreV3",
                                   "npu::npu_fused_infer_attention_score", 96_000, 24, 48),
    "BatchMatMulV2": _t("aclnnBatchMatMul_BatchMatMulV2Common_BatchMatMulV2", "AI_CORE", "aclnnBatchMatMul",
                        "aten::bmm", 61_000, 24),
    "SoftmaxV2": _t("aclnnSoftmax_SoftmaxV2AiCore_SoftmaxV2", "AI_VECTOR_CORE", "aclnnSoftmax", "aten::_softmax",
                    23_000, 48),
    "RmsNorm": _t("aclnnRmsNorm_RmsNorm_RmsNorm", "AI_VECTOR_CORE", "aclnnRmsNorm", "npu::npu_rms_norm", 9_800, 48),
    "RmsNormGrad": _t("aclnnRmsNormGrad_RmsNormGrad_RmsNormGrad", "AI_VECTOR_CORE", "aclnnRmsNormGrad",
                      "npu::npu_rms_norm_backward", 17_500, 48),
    "AddRmsNormBias": _t("aclnnAddRmsNormBias_AddRmsNormBias_AddRmsNormBias", "AI_VECTOR_CORE",
                         "aclnnAddRmsNormBias", "_C_ascend::npu_add_rms_norm_bias", 11_200, 48),
    "AddRmsNorm": _t("aclnnAddRmsNorm_AddRmsNorm_AddRmsNorm", "AI_VECTOR_CORE", "aclnnAddRmsNorm",
                     "npu::npu_add_rms_norm", 10_900, 48),
    "Add": _t("aclnnAdd_AddAiCore_Add", "AI_VECTOR_CORE", "aclnnAdd", "aten::add", 6_300, 48),
    "Sub": _t("aclnnSub_SubAiCore_Sub", "AI_VECTOR_CORE", "aclnnSub", "aten::sub", 2_100, 8),
    "Mul": _t("aclnnMul_MulAiCore_Mul", "AI_VECTOR_CORE", "aclnnMul", "aten::mul", 4_800, 48),
    "Muls": _t("aclnnMuls_MulAiCore_Mul", "AI_VECTOR_CORE", "aclnnMuls", "aten::mul", 2_600, 48, op_type="Mul"),
    "Exp": _t("aclnnExp_ExpAiCore_Exp", "AI_VECTOR_CORE", "aclnnExp", "aten::exp", 2_000, 8),
    "Maximum": _t("aclnnMaximum_MaximumAiCore_Maximum", "AI_VECTOR_CORE", "aclnnMaximum", "aten::maximum",
                  2_200, 8),
    "Sin": _t("aclnnSin_SinAiCore_Sin", "AI_VECTOR_CORE", "aclnnSin", "aten::sin", 3_900, 48),
    "Cos": _t("aclnnCos_CosAiCore_Cos", "AI_VECTOR_CORE", "aclnnCos", "aten::cos", 3_900, 48),
    "Swish": _t("aclnnSilu_SwishAiCore_Swish", "AI_VECTOR_CORE", "aclnnSilu", "aten::silu", 8_700, 48),
    "SwiGlu": _t("aclnnSwiGlu_SwiGlu_SwiGlu", "AI_VECTOR_CORE", "aclnnSwiGlu", "npu::npu_swiglu", 14_600, 48),
    "SwiGluGrad": _t("aclnnSwiGluGrad_SwiGluGrad_SwiGluGrad", "AI_VECTOR_CORE", "aclnnSwiGluGrad",
                     "npu::npu_swiglu_backward", 27_300, 48),
    "RotaryMul": _t("aclnnRotaryPositionEmbedding_RotaryMul_RotaryMul", "AI_VECTOR_CORE",
                    "aclnnRotaryPositionEmbedding", "npu::npu_rotary_mul", 7_400, 48),
    "RotaryMulGrad": _t("aclnnRotaryPositionEmbeddingGrad_RotaryMulGrad_RotaryMulGrad", "AI_VECTOR_CORE",
                        "aclnnRotaryPositionEmbeddingGrad", "npu::npu_rotary_mul_backward", 12_900, 48),
    "_triton_rope": _t("_triton_rope", "AI_VECTOR_CORE", "", None, 8_100, 40),
    "ReshapeAndCacheNdKernel": _t("ReshapeAndCacheNdKernel", "AI_VECTOR_CORE", "npu::_npu_reshape_and_cache",
                                  None, 5_600, 40),
    "MatMulV2": _t("aclnnMm_MatMulCommon_MatMulV2", "AI_CORE", "aclnnMm", "aten::mm", 58_000, 24),
    "MatMulV3": _t("aclnnMatmul_MatMulV3Common_MatMulV5", "AI_CORE", "aclnnMatmul", "aten::matmul", 66_000, 24),
    "Cast": _t("aclnnCast_CastAiCore_Cast", "AI_VECTOR_CORE", "aclnnCast", "aten::_to_copy", 5_200, 48),
    "TransData": _t("trans_TransData_17", "AI_VECTOR_CORE", "TransData", "aten::npu_format_cast", 9_300, 48),
    "GatherV2": _t("aclnnEmbedding_GatherV2AiCore_GatherV2", "AI_VECTOR_CORE", "aclnnEmbedding",
                   "aten::embedding", 6_800, 48),
    "EmbeddingDenseGradV2": _t("aclnnEmbeddingDenseBackward_EmbeddingDenseGradV2_EmbeddingDenseGradV2",
                               "AI_VECTOR_CORE", "aclnnEmbeddingDenseBackward", "aten::embedding_dense_backward",
                               120_000, 48),
    "GatherElements": _t("aclnnGather_GatherElementsV2AiCore_GatherElements", "AI_VECTOR_CORE", "aclnnGather",
                         "aten::gather", 3_100, 48),
    "LogSoftmaxV2": _t("aclnnLogSoftmax_LogSoftmaxAiCore_LogSoftmaxV2", "AI_VECTOR_CORE", "aclnnLogSoftmax",
                       "aten::_log_softmax", 96_000, 48),
    "LogSoftmaxGrad": _t("aclnnLogSoftmaxBackward_LogSoftmaxGrad_LogSoftmaxGrad", "AI_VECTOR_CORE",
                         "aclnnLogSoftmaxBackward", "aten::_log_softmax_backward_data", 118_000, 48),
    "ReduceSum": _t("aclnnReduceSum_ReduceSumOpAiCore_ReduceSum", "MIX_AIV", "aclnnReduceSum", "aten::sum",
                    4_900, 40),
    "ReduceMean": _t("aclnnMean_ReduceMeanAiCore_ReduceMean", "AI_VECTOR_CORE", "aclnnMean", "aten::mean",
                     3_300, 8),
    "NonZero": _t("aclnnNonzero_NonZeroAiCpu_NonZero", "AI_CPU", "aclnnNonzero", "aten::nonzero", 31_000, 0),
    "LpNormReduceV2": _t("aclnnNorm_LpNormReduceV2_LpNormReduceV2", "AI_VECTOR_CORE", "aclnnNorm", "aten::norm",
                         2_900, 48),
    "LpNormUpdateV2": _t("aclnnNorm_LpNormUpdateV2_LpNormUpdateV2", "AI_VECTOR_CORE", "aclnnNorm", "aten::norm",
                         1_300, 1),
    "Sqrt": _t("aclnnSqrt_SqrtAiCore_Sqrt", "AI_VECTOR_CORE", "aclnnSqrt", "aten::sqrt", 1_200, 1),
    "ApplyAdamW": _t("aclnnApplyAdamW_ApplyAdamW_ApplyAdamW", "AI_VECTOR_CORE", "aclnnApplyAdamW",
                     "npu::npu_apply_adam_w", 14_000, 48),
    "ArgMaxV2": _t("aclnnArgMax_ArgMaxV2AiCore_ArgMaxV2", "AI_VECTOR_CORE", "aclnnArgMax", "aten::argmax",
                   9_400, 48),
    "ApplyTopKTopP": _t("aclnnApplyTopKTopP_ApplyTopKTopP_ApplyTopKTopP", "AI_VECTOR_CORE", "aclnnApplyTopKTopP",
                        "npu::npu_top_k_top_p", 41_000, 48),
    "Sort": _t("aclnnSort_SortAiCore_Sort", "AI_VECTOR_CORE", "aclnnSort", "aten::sort", 52_000, 48),
    "DSARandomUniform": _t("aclnnInplaceUniform_DSARandomUniform_DSARandomUniform", "DSA_SQE",
                           "aclnnInplaceUniform", "aten::uniform_", 3_700, 0),
    "RealDiv": _t("aclnnDiv_RealDivAiCore_RealDiv", "AI_VECTOR_CORE", "aclnnDiv", "aten::div", 4_100, 48),
    "hcom_allReduce_": _t("hcom_allReduce__865_{i}_1", "COMMUNICATION", "HcclAllreduce", "c10d::allreduce_",
                          380_000, 0),
}

# --- call-stack frames (innermost first); site-packages prefix as torch_npu records them -----------
_SP = "/usr/local/python3.10.14/lib/python3.10/site-packages/"
_TRAIN_OUTER = (
    _SP + "megatron/core/models/gpt/gpt_model.py(279): forward",
    _SP + "verl/workers/actor/megatron_actor.py(463): forward_step",
    _SP + "megatron/core/pipeline_parallel/schedules.py(275): forward_step",
    _SP + "megatron/core/pipeline_parallel/schedules.py(496): forward_backward_no_pipelining",
    _SP + "verl/workers/actor/megatron_actor.py(566): forward_backward_batch",
)
_TRAIN_LAYER = (
    _SP + "megatron/core/transformer/transformer_layer.py(412): forward",
    _SP + "megatron/core/transformer/transformer_block.py(549): forward",
)
_PHASE_FRAMES = {
    "compute_ref_log_prob": (_SP + "verl/workers/actor/megatron_actor.py(211): compute_log_prob",
                             _SP + "verl/workers/megatron_workers.py(877): compute_ref_log_prob"),
    "compute_log_prob": (_SP + "verl/workers/actor/megatron_actor.py(211): compute_log_prob",
                         _SP + "verl/workers/megatron_workers.py(836): compute_log_prob"),
    "update_actor": (_SP + "verl/workers/actor/megatron_actor.py(640): update_policy",
                     _SP + "verl/workers/megatron_workers.py(687): update_actor"),
}
_RAY = (_SP + "verl/single_controller/base/decorator.py(430): inner",
        _SP + "verl/utils/profiler/mstx_profile.py(243): wrapper",
        _SP + "ray/_private/function_manager.py(689): actor_method_executor",
        _SP + "ray/_private/worker.py(932): main_loop",
        _SP + "ray/_private/workers/default_worker.py(297): <module>")
_TRAIN_MODULE = {
    "attention": (_SP + "mindspeed/core/transformer/flash_attention/flash_attention.py(88): forward",
                  _SP + "megatron/core/transformer/dot_product_attention.py(164): forward",
                  _SP + "megatron/core/transformer/attention.py(701): forward"),
    "norm": (_SP + "megatron/core/transformer/torch_norm.py(95): forward",),
    "qk_norm": (_SP + "megatron/core/transformer/torch_norm.py(95): forward",
                _SP + "megatron/core/transformer/attention.py(1012): get_query_key_value_tensors"),
    "rope": (_SP + "mindspeed/core/fusions/fused_rope.py(38): apply_rotary_pos_emb_bshd",
             _SP + "megatron/core/models/common/embeddings/rope_utils.py(230): apply_rotary_pos_emb",
             _SP + "megatron/core/transformer/attention.py(683): forward"),
    "activation": (_SP + "mindspeed/core/fusions/fused_swiglu.py(21): forward",
                   _SP + "megatron/core/transformer/mlp.py(178): forward"),
    "matmul": (_SP + "megatron/core/tensor_parallel/layers.py(812): forward",
               _SP + "megatron/core/transformer/mlp.py(160): forward"),
    "residual": (_SP + "megatron/core/fusions/fused_bias_dropout.py(50): _bias_dropout_add_func",),
    "embedding": (_SP + "megatron/core/models/common/embeddings/language_model_embedding.py(110): forward",),
    "logprob": (_SP + "verl/utils/megatron/tensor_parallel.py(156): vocab_parallel_log_probs_from_logits",
                _SP + "verl/workers/actor/megatron_actor.py(432): logits_processor"),
    "loss": (_SP + "verl/trainer/ppo/core_algos.py(912): compute_policy_loss_vanilla",
             _SP + "verl/workers/actor/megatron_actor.py(520): loss_func"),
    "optimizer": (_SP + "mindspeed/optimizer/adamw.py(94): adamw",
                  _SP + "megatron/core/optimizer/optimizer.py(476): step",
                  _SP + "verl/workers/actor/megatron_actor.py(655): update_policy"),
    "grad_norm": (_SP + "megatron/core/optimizer/clip_grads.py(118): get_grad_norm_fp32",
                  _SP + "megatron/core/optimizer/optimizer.py(434): clip_grad_norm",
                  _SP + "verl/workers/actor/megatron_actor.py(655): update_policy"),
    "communication": (_SP + "torch/distributed/distributed_c10d.py(2501): all_reduce",
                      _SP + "megatron/core/distributed/param_and_grad_buffer.py(386): start_grad_sync"),
    "layout": (_SP + "mindspeed/core/memory/adaptive_recomputing/pluggable_allocator.py(51): format_cast",
               _SP + "megatron/core/optimizer/optimizer.py(476): step"),
}
_INFER_OUTER = (
    _SP + "vllm/model_executor/models/qwen3.py(289): forward",
    _SP + "vllm_ascend/worker/model_runner_v1.py(1873): _model_forward",
    _SP + "vllm_ascend/worker/model_runner_v1.py(2250): execute_model",
    _SP + "vllm_ascend/worker/worker_v1.py(276): execute_model",
    _SP + "vllm/v1/executor/multiproc_executor.py(560): worker_busy_loop",
)
_INFER_LAYER = (_SP + "vllm/model_executor/models/qwen3.py(224): forward",
                _SP + "vllm/model_executor/models/qwen2.py(356): forward")
_INFER_MODULE = {
    "attention": (_SP + "vllm_ascend/attention/attention_v1.py(988): forward_impl",
                  _SP + "vllm_ascend/attention/attention_v1.py(1102): forward",
                  _SP + "vllm/attention/layer.py(315): forward"),
    "norm": (_SP + "vllm_ascend/ops/layernorm.py(86): forward_oot",
             _SP + "vllm/model_executor/custom_op.py(44): forward"),
    "qk_norm": (_SP + "vllm_ascend/ops/layernorm.py(86): forward_oot",
                _SP + "vllm/model_executor/models/qwen3.py(130): forward"),
    "rope": (_SP + "vllm_ascend/ops/triton/rope.py(201): rope_forward_triton",
             _SP + "vllm_ascend/ops/rotary_embedding.py(414): forward_oot"),
    "kv_cache": (_SP + "vllm_ascend/attention/attention_v1.py(930): reshape_and_cache",
                 _SP + "vllm_ascend/attention/attention_v1.py(1102): forward"),
    "activation": (_SP + "vllm_ascend/ops/activation.py(42): forward_oot",
                   _SP + "vllm/model_executor/models/qwen2.py(96): forward"),
    "matmul": (_SP + "vllm_ascend/ops/linear_op.py(160): apply_impl",
               _SP + "vllm/model_executor/layers/linear.py(566): forward"),
    "embedding": (_SP + "vllm_ascend/ops/vocab_parallel_embedding.py(110): forward",),
    "logits": (_SP + "vllm/model_executor/layers/logits_processor.py(78): _get_logits",),
    "sampling": (_SP + "vllm_ascend/sample/sampler.py(66): forward_native",
                 _SP + "vllm/v1/sample/sampler.py(80): forward",
                 _SP + "vllm_ascend/worker/model_runner_v1.py(2301): execute_model"),
}

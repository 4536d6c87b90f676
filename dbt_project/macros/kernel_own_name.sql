{#- The kernel's own name: its function name without return type, namespaces, template arguments and
    parameter list, so that a family pattern matches what the kernel is, never text inside its template
    arguments ("cutlass" in cutlass::bfloat16_t of an MoE finalize kernel, "gemm" in fbgemm_gpu::).
      void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, …>(int, …)
          → vectorized_elementwise_kernel
      void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4>(…::Params) → Kernel
      ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>) → ncclDevKernel_AllGather_RING_LL
      _ZN5aiter24add_rmsnorm_quant_kernelI… (Itanium-mangled) → add_rmsnorm_quant_kernel
    Template arguments are removed by one pattern that matches <…> nested up to 8 deep (RE2 has no
    recursion). Mangled names (_ZN<len><id>…<len><name>I…) are read heuristically (a regular expression
    cannot count the length prefixes): the last <digits><identifier> before the template (I…) or end (E).
    Names with none of these parts (Cijk_…, triton_poi_fused_…, Ascend op names) come back as they are. -#}
{%- macro tilake_kernel_own_name(name) -%}
{%- set ns = namespace(p='<[^<>]*>') -%}
{%- for _ in range(7) -%}{%- set ns.p = '<(?:[^<>]|' ~ ns.p ~ ')*>' -%}{%- endfor -%}
case
    when regexp_matches(coalesce({{ name }}, ''), '^_ZN')
        then coalesce(nullif(regexp_replace(regexp_extract({{ name }},
            '^_ZN((?:[0-9]+[A-Za-z_][A-Za-z0-9_]*?)+?)(?:I[A-Z0-9]|E|$)', 1),
            '^(.*[A-Za-z_])?[0-9]+([A-Za-z_])', '\2'), ''), {{ name }})
    else coalesce(nullif(regexp_extract(regexp_replace(regexp_replace(regexp_replace({{ name }},
        '^std::enable_if<.*>::type ', ''), '\(anonymous namespace\)::', '', 'g'), '{{ ns.p }}', '', 'g'),
        '^[^(]*?([A-Za-z_][A-Za-z0-9_]*)\s*(?:\(|$)', 1), ''), {{ name }})
end
{%- endmacro -%}

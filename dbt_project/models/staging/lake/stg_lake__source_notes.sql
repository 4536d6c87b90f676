select run_id, model_family, module, side, path, "function" as function_name, kernel
from {{ source('lake', 'source_notes') }}

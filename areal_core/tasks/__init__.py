"""The task system: declarative task specs (YAML in `tasks/`, or registered by plugins), their data, their
prompts, and the registries of tasks and dataset generators. See `spec.py` for the format."""
from areal_core.tasks.prompts import EmptyPromptField, encode_prompt, render_prompt
from areal_core.tasks.registry import (
    TASKS_PATH_ENV,
    GeneratorSpec,
    generator_registry,
    task_dirs,
    task_registry,
    unavailable_reason,
)
from areal_core.tasks.spec import (
    ChatMessage,
    DatasetSpec,
    EvalDefaults,
    FieldSpec,
    PromptSpec,
    RewardRef,
    TaskSpec,
    load_task_yaml,
    task_spec_from_dict,
)
from areal_core.tasks.task import DATA_DIR_ENV, Task, get_task, resolve_data_dir

__all__ = ["DATA_DIR_ENV", "TASKS_PATH_ENV", "ChatMessage", "DatasetSpec", "EmptyPromptField", "EvalDefaults",
           "FieldSpec", "GeneratorSpec", "PromptSpec", "RewardRef", "Task", "TaskSpec", "encode_prompt",
           "generator_registry", "get_task", "load_task_yaml", "render_prompt", "resolve_data_dir", "task_dirs",
           "task_registry", "task_spec_from_dict", "unavailable_reason"]

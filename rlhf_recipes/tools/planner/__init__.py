"""Will a recipe fit? Predicted peak memory per GPU from the model's config.json alone.

    rlhf-recipes plan recipes/grpo.yaml --config_file accelerate_configs/4gpu.yaml

memory.py holds the arithmetic (one documented function per term), shapes.py the model shapes
(shipped for the book's models), launch.py what is read from an accelerate config, plan.py
the assembly per family, report.py the verdict, suggestions and table. What the model is validated against
(tensor memory on CPU, CUDA peaks on a GPU) is measured by benchmarks/ (tensor_memory.py, families.py).
"""

from rlhf_recipes.tools.planner.launch import Launch, read_launch
from rlhf_recipes.tools.planner.plan import Plan, Workload, build_plan, plan_recipe
from rlhf_recipes.tools.planner.shapes import ModelShape, load_shape, shape_from_config

__all__ = ["Launch", "ModelShape", "Plan", "Workload", "build_plan", "load_shape", "plan_recipe", "read_launch",
           "shape_from_config"]

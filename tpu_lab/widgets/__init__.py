"""Thin ipywidgets views over tpu_lab's core objects (the only package that imports ipywidgets)."""

from tpu_lab.widgets.generation_panel import GenerationPanel
from tpu_lab.widgets.launch_panel import LaunchPanel
from tpu_lab.widgets.model_loader import ModelLoader
from tpu_lab.widgets.probe_panel import ProbePanel

__all__ = ["GenerationPanel", "LaunchPanel", "ModelLoader", "ProbePanel"]

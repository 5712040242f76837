"""widgets: thin ipywidgets views over the core (the only package that imports ipywidgets). A widget
reads a core object, sets traits and forwards clicks to a core function; it holds no logic of its own
and touches no private member of a core object.

May import: host, models, compile, tp and the base.
"""

from tpu_lab.widgets.generation_panel import GenerationPanel
from tpu_lab.widgets.launch_panel import LaunchPanel
from tpu_lab.widgets.model_loader import ModelLoader
from tpu_lab.widgets.probe_panel import ProbePanel
from tpu_lab.widgets.watch_panel import WatchPanel

__all__ = ["GenerationPanel", "LaunchPanel", "ModelLoader", "ProbePanel", "WatchPanel"]

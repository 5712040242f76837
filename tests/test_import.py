import subprocess
import sys


def _run(code):
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_import_does_not_import_torch_or_widgets():
    out = _run(
        "import sys, tpu_lab; "
        "print(sorted(m for m in ('torch', 'transformers', 'ipywidgets', 'matplotlib') if m in sys.modules))"
    )
    assert out == "[]"


def test_public_names_resolve_lazily():
    out = _run(
        "import sys, tpu_lab as tl; f = tl.probe; e = tl.TpuLabError; t = tl.tiny_model; "
        "print(callable(f), 'torch' in sys.modules)"
    )
    assert out == "True False"


def test_dir_lists_public_api():
    import tpu_lab

    assert {"probe", "tiny_model", "widgets", "DeviceReport", "TpuLabError"} <= set(dir(tpu_lab))

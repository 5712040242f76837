"""tl.watch() checked blind, thirty-seventh round: an int that slices a ModuleList (EnCodec's residual
quantizer, ``self.layers[:n_q]``) is said to fix which layers run, with a fix that holds (a few values, or
every layer masked), never "pass the layer in"; a float a library's compiled forward reads as a plain number
(ViTMAE's ``config.mask_ratio``) is never told to be passed as a tensor. Checked against Dynamo's records."""

import torch
from _dynamo_oracle import check_against_dynamo

import tpu_lab as tl


class ResidualVQ(torch.nn.Module):  # facebookresearch/encodec's ResidualVectorQuantization, cut down
    def __init__(self, n=4, d=8):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(n))

    def forward(self, x, n_q=None):
        n_q = n_q or len(self.layers)
        out, residual = torch.zeros_like(x), x
        for layer in self.layers[:n_q]:  # the bandwidth picks how many codebooks run
            q = layer(residual)
            residual, out = residual - q, out + q
        return out


def test_an_int_that_slices_a_module_list_is_said_to_fix_which_layers_run(dynamo):
    model = torch.compile(ResidualVQ(), backend="eager")
    with tl.watch() as w:
        for n_q in (4, 2, 3):
            model(torch.randn(2, 8), n_q=n_q)
    check_against_dynamo(w, dynamo)
    sliced = [c for r in w.table for c in r.causes if "slices a ModuleList" in c.words]
    assert sliced and all(c.fix.startswith("expected once per value of n_q") for c in sliced), w.table.to_text()
    assert not any("pass the submodule in" in c.fix or "as a tensor" in c.fix for r in w.table for c in r.causes)


def test_a_float_a_librarys_forward_reads_as_a_plain_number_is_never_told_to_be_a_tensor(dynamo):
    from transformers import ViTMAEConfig, ViTMAEForPreTraining

    torch.manual_seed(0)
    config = ViTMAEConfig(
        image_size=16, patch_size=4, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
        decoder_hidden_size=16, decoder_num_hidden_layers=1, decoder_num_attention_heads=2, decoder_intermediate_size=32,
    )  # fmt: skip
    model = ViTMAEForPreTraining(config)
    f = torch.compile(model, backend="aot_eager")  # its tensorified float is specialised back: a graph per value
    with tl.watch() as w, torch.no_grad():
        for ratio in (0.75, 0.5, 0.25):  # the evaluation's mask ratio, set on the config
            model.config.mask_ratio = ratio
            f(pixel_values=torch.randn(1, 3, 16, 16))
    check_against_dynamo(w, dynamo)
    ratio = [c for r in w.table for c in r.causes if "self.config.mask_ratio" in c.words]
    assert ratio and not any("as a tensor (" in c.fix or "torch.exp" in c.fix for c in ratio), [c.fix for c in ratio]
    assert any(c.fix.startswith("expected once per value of self.config.mask_ratio") for c in ratio), ratio


def test_a_break_where_torch_checks_a_mask_is_causal_is_fixed_by_saying_so(dynamo):
    torch.manual_seed(0)  # pytorch/tutorials' translation transformer: a greedy decode step compiled
    layer = torch.nn.TransformerDecoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
    decoder = torch.nn.TransformerDecoder(layer, num_layers=1).eval()
    tgt, memory = torch.randn(3, 1, 8), torch.randn(5, 1, 8)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(3).bool()
    with tl.watch() as w, torch.no_grad():
        torch.compile(decoder, backend="eager")(tgt, memory, tgt_mask=mask)
    check_against_dynamo(w, dynamo)
    causal = [b for b in w.table.breaks if "transformer.py" in b.words]
    assert causal and all(b.fix.startswith("pass is_causal=True with the causal mask") for b in causal), w.table.breaks
    torch._dynamo.reset()
    with tl.watch() as fixed, torch.no_grad():  # the fix as printed
        torch.compile(decoder, backend="eager")(tgt, memory, tgt_mask=mask, tgt_is_causal=True)
    assert not fixed.table.breaks, fixed.table.to_text()


def proto_loss(logits, target):  # prototypical networks' loss: the loss, and stats read back for logging
    loss = torch.nn.functional.cross_entropy(logits, target)
    acc = (logits.argmax(-1) == target).float().mean()
    return loss, {"loss": loss.item(), "acc": acc.item()}


def test_values_carried_over_a_break_inside_a_dict_display_are_named(dynamo):
    f = torch.compile(proto_loss, backend="eager")
    with tl.watch() as w:
        for n in (4, 6):
            f(torch.randn(n, 3), torch.randint(0, 3, (n,)))
    check_against_dynamo(w, dynamo, also=("size mismatch",))  # its invariants: no placeholder among the inputs
    resumed = [r.signature for r in w.table if "after the graph break" in r.function]
    assert resumed and all(s.startswith("loss: f32[]") for s in resumed), resumed


_ANCHORS = {}


def grid_anchors(feature, stride, by_text=True):  # torchvision's AnchorGenerator: a cache keyed by the grid size
    h, w = feature.shape[-2:]
    key = str(h) + "x" + str(w) if by_text else (h, w)
    if key not in _ANCHORS:
        _ANCHORS[key] = torch.stack(torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij"), -1) * stride
    return feature.sum() + _ANCHORS[key].sum()


def test_str_of_a_size_made_dynamic_is_said_in_words_and_keying_by_the_numbers_avoids_the_break(dynamo):
    f = torch.compile(grid_anchors, backend="eager")
    with tl.watch() as w:
        for n in (4, 6):
            f(torch.randn(1, n, n), 8)
    check_against_dynamo(w, dynamo, also=("size mismatch", "_ANCHORS"))  # each failed guard named
    text = [b for b in w.table.breaks if b.words.startswith("str() or repr()")]
    assert text and all(b.fix.startswith("key by the numbers themselves") for b in text), w.table.breaks
    assert "tp_repr" not in str(w.table)
    torch._dynamo.reset()
    _ANCHORS.clear()
    with tl.watch() as fixed:  # the fix as printed: the tuple (h, w) as the key
        for n in (4, 6, 8):
            f(torch.randn(1, n, n), 8, by_text=False)
    assert not fixed.table.breaks, fixed.table.to_text()


class AutoCorrelation(torch.nn.Module):  # thuml/Autoformer: the aggregation's output permuted on the same line
    def aggregate(self, values):
        torch._dynamo.graph_break()  # Autoformer's int(index[i]) reads: a break inside the call
        return values * 2

    def forward(self, x):
        out = self.aggregate(x).permute(0, 2, 1)
        return out.sum()


def test_a_value_carried_over_a_break_before_a_permute_on_its_line_is_named_by_its_call_not_the_result(dynamo):
    f = torch.compile(AutoCorrelation(), backend="eager")
    with tl.watch() as w:
        for n in (6, 8):
            f(torch.randn(2, 4, n))
    check_against_dynamo(w, dynamo, also=("size mismatch",))
    sized = [c for r in w.table if r.function.startswith("forward after") for c in r.causes if "dimension 2" in c.words]
    # out is the permuted value: its dimension 2 is another one; the carried one is self.aggregate(x)'s
    assert sized and all("self.aggregate(x)" in c.words and "out " not in c.words for c in sized), w.table.to_text()

"""A tiny BERT built offline (a word-level tokenizer trained on a few sentences, random weights), for the
watch's tests of transformers code: a classifier under a pipeline, an encoder a tokenizer feeds."""

import torch


def tiny_bert(head: str = "BertModel"):
    """(``transformers.<head>`` in eval mode, its tokenizer); ``head``: ``BertModel`` or a task class."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    corpus = ["the cat sat on the mat", "a dog ran in the park", "graphs compile once", "this movie was great"] * 5
    raw = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    raw.train_from_iterator(corpus, trainers.WordLevelTrainer(special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]"]))
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=raw, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]"
    )
    config = transformers.BertConfig(
        vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64
    )
    torch.manual_seed(0)
    return getattr(transformers, head)(config).eval(), tok

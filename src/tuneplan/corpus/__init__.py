"""The user's own training data: read it (JSONL, JSON, CSV, Parquet, a `datasets.save_to_disk` folder),
count its tokens (a local tokenizer and the model's chat template, or a stated approximation from
characters), and work out what the collator does with it (padding, packing, truncation, the longest
batch). Pure data arithmetic: the estimate built on it lives in `tuneplan.integrations.dataset`."""

"""Hooks into training frameworks: `tuneplan.integrations.transformers.TuneplanCallback` records a real
run (transformers Trainer, TRL's trainers) as a row of the runs schema."""

"""Rejection sampling (book chapter 9): selection rules and answer grading as pure functions; the config.

The SFT stage reuses custom_losses/sft/ (BookSFTTrainer); the stages around it live in
rlhf_recipes/families/rejection_sampling.py.
"""

"""Talk to trained models in a local web page (Gradio), side by side.

    rlhf-recipes chat outputs/dpo                       # the trained model next to the model it started from
    rlhf-recipes chat outputs/dpo outputs/simpo         # two runs, the same prompt
    rlhf-recipes chat outputs/grpo/checkpoint-500       # a checkpoint (an unfinished run)
    rlhf-recipes chat outputs/preference_rm             # a reward model: score a prompt with two responses
    rlhf-recipes chat outputs/dpo --port 7861 --device cuda

Each answer streams as it is generated. The prompt is built as the run's training prompts were: the
recipe's system prompt (as its data source adds it), the run's saved tokenizer and chat template, and
the recipe's chat_template_kwargs (e.g. enable_thinking); "Prompt as the model reads it" shows the
result. Sampling settings start at the recipe's (temperature, top_p, top_k, max_completion_length)
where it has them. With one policy run, the reference column is the recipe's model_name_or_path (the
starting policy) asked the same prompt; --no-reference leaves it out. A LoRA run loads as its adapter
on that base model. Reward-model runs get a page that scores a prompt with two responses, as the model
was trained to read them (a Bradley-Terry score, an ORM's P(correct), a PRM's P(no bad step)).
The page listens on 127.0.0.1 only unless --host says otherwise; --share (a public Gradio link) is off.
Needs the `chat` extra: pip install 'rlhf-recipes[chat]'.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Any

from rlhf_recipes.run_folder import RunFolderError
from rlhf_recipes.tools.policy import load_policy
from rlhf_recipes.tools.surroundings import SurroundingsError, check_device, check_port_free, port_message, require
from rlhf_recipes.tools.trained_model import TrainedModel, open_trained_model

DEFAULT_SAMPLING = {"temperature": 0.7, "top_p": 1.0, "top_k": 0, "max_new_tokens": 256}
# System fonts: the page works offline (Gradio's default theme fetches its font from the web).
FONTS = ("ui-sans-serif", "system-ui", "sans-serif")
MONO_FONTS = ("ui-monospace", "monospace")


@dataclass
class Column:
    """One answer column: a model, the tokenizer and prompt building of the run it answers for."""

    label: str
    model: Any
    tokenizer: Any
    run: TrainedModel  # whose prompt building it uses (the reference uses its run's)


def sampling_defaults(recipe) -> dict[str, Any]:
    """The recipe's own sampling settings where it has them (a policy-gradient recipe does), else ours."""
    values = {"temperature": recipe.setting("temperature"), "top_p": recipe.setting("top_p"),
              "top_k": recipe.setting("top_k"), "max_new_tokens": recipe.setting("max_completion_length")}
    return {k: DEFAULT_SAMPLING[k] if v is None else v for k, v in values.items()}


def stream_answer(column: Column, prompt: str, temperature: float, top_p: float, top_k: int,
                  max_new_tokens: int):
    """Yield the answer so far, token by token (transformers' TextIteratorStreamer, generate in a thread)."""
    import threading

    import torch
    from transformers import TextIteratorStreamer

    if not prompt.strip():
        yield ""
        return
    ids = column.run.prompt_ids(column.tokenizer, prompt)
    device = next(column.model.parameters()).device
    streamer = TextIteratorStreamer(column.tokenizer, skip_prompt=True, skip_special_tokens=True)
    sample = temperature > 0
    kwargs = dict(input_ids=torch.tensor([ids], device=device), attention_mask=torch.ones(1, len(ids), dtype=torch.long,
                  device=device), max_new_tokens=int(max_new_tokens), do_sample=sample, streamer=streamer,
                  temperature=temperature if sample else None, top_p=top_p if sample else None,
                  top_k=int(top_k) if sample else None, pad_token_id=column.tokenizer.pad_token_id)
    failures: list[BaseException] = []

    def generate():
        try:
            column.model.generate(**kwargs)
        except BaseException as e:  # noqa: BLE001  (e.g. out of memory: end the stream, say why below)
            failures.append(e)
            streamer.end()

    thread = threading.Thread(target=generate, daemon=True)
    thread.start()
    text = ""
    for piece in streamer:
        text += piece
        yield text
    thread.join()
    if failures:
        raise RuntimeError(f"{column.label}: generation failed: {failures[0]}") from failures[0]


def score_pair(scorers: list[tuple[str, TrainedModel, Any, Any, dict]], prompt: str, first: str, second: str) -> str:
    """A markdown table: each reward model's score of (prompt, response A) and (prompt, response B)."""
    from rewards.reward_model_scoring import score_completions
    from rlhf_recipes.data.sources import chat_prompt

    if not first.strip() or not second.strip():
        return "Write both responses to score them."
    lines = ["| reward model | response A | response B | prefers |", "|---|---|---|---|"]
    for label, run, model, tokenizer, info in scorers:
        messages = chat_prompt(run.recipe, prompt) if prompt.strip() else None
        completions = [[{"role": "assistant", "content": text}] for text in (first, second)]
        a, b = score_completions(info, model, tokenizer, [messages, messages] if messages else None, completions)
        better = "A" if a > b else "B" if b > a else "tie"
        lines.append(f"| {label} ({info['kind']}) | {a:.4f} | {b:.4f} | {better} |")
    return "\n".join(lines)


def build_page(columns: list[Column], scorers: list, sampling: dict[str, Any]):
    import gradio as gr

    with gr.Blocks(title="rlhf-recipes chat") as page:
        gr.Markdown("## rlhf-recipes chat\n" + "\n".join(
            f"- **{c.label}**" for c in columns) + "".join(f"\n- **{s[0]}** (reward model)" for s in scorers))
        with gr.Tabs():
            if columns:
                with gr.Tab("Chat", id="chat"):
                    prompt = gr.Textbox(label="Prompt", lines=3, elem_id="prompt",
                                        placeholder="Ask something; every model gets the same prompt")
                    send = gr.Button("Send", variant="primary", elem_id="send")
                    with gr.Row():
                        answers = [gr.Textbox(label=c.label, lines=10, max_lines=30, elem_id=f"answer-{i}",
                                              interactive=False) for i, c in enumerate(columns)]
                    with gr.Accordion("Sampling", open=False), gr.Row():
                        temperature = gr.Slider(0.0, 2.0, value=sampling["temperature"], step=0.05,
                                                label="temperature (0: greedy)")
                        top_p = gr.Slider(0.05, 1.0, value=sampling["top_p"], step=0.05, label="top_p")
                        top_k = gr.Slider(0, 200, value=sampling["top_k"], step=1, label="top_k (0: off)")
                        max_new = gr.Slider(1, 4096, value=sampling["max_new_tokens"], step=1, label="max new tokens")
                    with gr.Accordion("Prompt as the model reads it", open=False):
                        rendered = gr.Textbox(show_label=False, lines=6, interactive=False, elem_id="rendered")
                    settings = [prompt, temperature, top_p, top_k, max_new]
                    for column, box in zip(columns, answers):  # one event each: the columns stream at once
                        stream = (lambda c: lambda *a: (yield from stream_answer(c, *a)))(column)
                        send.click(stream, settings, box)
                        prompt.submit(stream, settings, box)
                    lead = columns[0]  # whose prompt building the page shows (the reference asks the same)
                    show = lambda text: lead.tokenizer.decode(lead.run.prompt_ids(lead.tokenizer, text)) if text else ""
                    send.click(show, prompt, rendered)
                    prompt.submit(show, prompt, rendered)
            if scorers:
                with gr.Tab("Score two responses", id="score"):
                    rm_prompt = gr.Textbox(label="Prompt", lines=2, elem_id="rm-prompt")
                    with gr.Row():
                        first = gr.Textbox(label="Response A", lines=6, elem_id="response-a")
                        second = gr.Textbox(label="Response B", lines=6, elem_id="response-b")
                    score = gr.Button("Score", variant="primary", elem_id="score")
                    result = gr.Markdown(elem_id="scores")
                    score.click(lambda p, a, b: score_pair(scorers, p, a, b), [rm_prompt, first, second], result)
    return page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlhf-recipes chat", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run folders (or checkpoint-<step> folders)")
    parser.add_argument("--no-reference", "--no_reference", action="store_true",
                        help="leave out the starting policy's column (shown when one policy run is given)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)")
    parser.add_argument("--port", type=int, default=7860)
    parser.add_argument("--share", action="store_true", help="also open a public Gradio link (off by default)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1 ... (default: cuda when there is one)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16", "float16"),
                        help="load the models in this dtype (default: bfloat16 on a GPU, float32 on the CPU)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no calls home from a local page
    # What surrounds the tool first, each in one line, before any model loads (minutes on a large one): the port
    # is free, Gradio imports, the run folders are finished runs, the device exists.
    try:
        check_port_free(args.host, args.port, "rlhf-recipes chat")
        require("gradio", "rlhf-recipes chat")
        runs = [open_trained_model(path, checkpoint_option=False) for path in args.runs]
        import torch

        device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
        check_device(device, "rlhf-recipes chat")
    except (RunFolderError, SurroundingsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype or ("bfloat16" if device.startswith("cuda") else "float32"))
    columns, scorers = [], []
    for run in runs:
        print(f"loading {run.label} from {run.folder} ...", flush=True)
        if run.reward_model:
            model, tokenizer, info = run.load_reward_model(dtype)
            scorers.append((run.label, run, model.to(device).eval(), tokenizer, info))
        else:
            columns.append(Column(run.label, run.load_policy(dtype).to(device).eval(), run.load_tokenizer(), run))
    if len(columns) == 1 and not args.no_reference:
        first = columns[0].run
        print(f"loading the reference {first.recipe.model.model_name_or_path} ...", flush=True)
        reference = load_policy(first.base_model, dtype or "auto", device=device,
                                revision=first.recipe.model.model_revision)
        columns.append(Column(f"reference: {first.recipe.model.model_name_or_path} (the starting policy)", reference,
                              columns[0].tokenizer, first))
    sampling = sampling_defaults(columns[0].run.recipe) if columns else DEFAULT_SAMPLING
    page = build_page(columns, scorers, sampling)
    import gradio as gr

    theme = gr.themes.Default(font=FONTS, font_mono=MONO_FONTS)
    try:
        page.queue().launch(server_name=args.host, server_port=args.port, share=args.share, theme=theme,
                            inbrowser=False, footer_links=[])
    except OSError as e:  # the port was taken between the check and now, or the share link cannot be opened
        print(f"error: {port_message(e, args.host, args.port, 'rlhf-recipes chat')}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

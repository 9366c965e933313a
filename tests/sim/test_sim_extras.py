"""Engine-specific endpoints: vLLM's and llama.cpp's extras beyond the OpenAI API."""

from __future__ import annotations

import json

import openai
import pytest

from mindrouter.sim import SimConfig, SimModel

from .support import Sim, sse_payloads, start_sim

HI = [{"role": "user", "content": "Hello there"}]


def test_vllm_health_version_and_unknown_model(vllm: Sim) -> None:
    with vllm.http() as http:
        health = http.get("/health")
        assert (health.status_code, health.content) == (200, b"")
        assert http.get("/version").json()["version"]
        missing = http.post("/v1/chat/completions", json={"model": "nope", "messages": HI})
        assert http.get("/no/such/route").json() == {"detail": "Not Found"}
    assert missing.status_code == 404
    assert missing.json() == {
        "error": {
            "message": "The model `nope` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }
    with pytest.raises(openai.NotFoundError):
        vllm.openai().chat.completions.create(model="nope", messages=HI)  # type: ignore[arg-type]


def test_vllm_tokenize_and_detokenize(vllm: Sim) -> None:
    with vllm.http() as http:
        prompt = http.post("/tokenize", json={"model": "sim-chat", "prompt": "Hello world"}).json()
        assert prompt["count"] == len(prompt["tokens"]) == 2
        assert prompt["max_model_len"] == 4096
        text = http.post("/detokenize", json={"model": "sim-chat", "tokens": prompt["tokens"]})
        assert text.json() == {"prompt": "Hello world"}
        chat = http.post(
            "/tokenize",
            json={"model": "sim-chat", "messages": HI, "return_token_strs": True},
        ).json()
        assert "".join(chat["token_strs"]).startswith("<|user|>")
        both = http.post(
            "/tokenize",
            json={"messages": HI, "add_generation_prompt": True, "continue_final_message": True},
        )
        assert both.status_code == 400
        unknown = http.post("/tokenize", json={"model": "nope", "prompt": "x"})
        assert unknown.status_code == 404


def test_vllm_metrics_families(vllm: Sim) -> None:
    vllm.openai().chat.completions.create(model="sim-chat", messages=HI)  # type: ignore[arg-type]
    with vllm.http() as http:
        http.post("/v1/chat/completions", content=b"nonsense")
        text = http.get("/metrics").text
    assert 'vllm:num_requests_running{engine="0",model_name="sim-chat"} 0.0' in text
    assert 'vllm:num_requests_waiting{engine="0",model_name="sim-chat"} 0.0' in text
    assert "# TYPE vllm:kv_cache_usage_perc gauge" in text
    assert "vllm:generation_tokens_total" in text and "vllm:prompt_tokens_total" in text
    assert 'mindrouter_sim_requests_total{route="/v1/chat/completions",status="200"}' in text
    assert 'mindrouter_sim_requests_total{route="/v1/chat/completions",status="400"}' in text


def test_vllm_old_reasoning_field_name() -> None:
    sim = start_sim(
        SimConfig(engine="vllm", models=[SimModel("r-think")], reasoning_field="reasoning_content")
    )
    try:
        reply = sim.openai().chat.completions.create(model="r-think", messages=HI)  # type: ignore[arg-type]
        extra = reply.choices[0].message.model_extra or {}
        assert extra.get("reasoning_content") and "reasoning" not in extra
    finally:
        sim.close()


def test_vllm_continuous_usage_stats(vllm: Sim) -> None:
    body = {
        "model": "sim-chat",
        "messages": HI,
        "max_tokens": 3,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    with vllm.http() as http:
        payloads = sse_payloads(http.post("/v1/chat/completions", json=body).text)
    counts = [json.loads(p)["usage"]["completion_tokens"] for p in payloads[:-1]]
    assert counts == sorted(counts) and counts[-1] == 3


def test_llamacpp_health_props_slots(llamacpp: Sim) -> None:
    with llamacpp.http() as http:
        assert http.get("/health").json() == {"status": "ok"}
        assert http.get("/v1/health").json() == {"status": "ok"}
        props = http.get("/props").json()
        slots = http.get("/slots").json()
        missing = http.get("/nope")
    assert props["default_generation_settings"]["n_ctx"] == 4096
    assert props["total_slots"] == llamacpp.config.slots == len(slots)
    assert props["model_path"].endswith(".gguf")
    assert props["modalities"]["vision"] is False
    assert [s["id"] for s in slots] == list(range(len(slots)))
    assert all(s["n_ctx"] == 4096 and s["is_processing"] is False for s in slots)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"


def test_llamacpp_tokenizer_endpoints(llamacpp: Sim) -> None:
    with llamacpp.http() as http:
        tokens = http.post("/tokenize", json={"content": "Hello world"}).json()["tokens"]
        pieces = http.post("/tokenize", json={"content": "Hello world", "with_pieces": True}).json()
        text = http.post("/detokenize", json={"tokens": tokens}).json()
        prompt = http.post("/apply-template", json={"messages": HI}).json()["prompt"]
    assert len(tokens) == 2
    assert [p["piece"] for p in pieces["tokens"]] == ["Hello", " world"]
    assert text == {"content": "Hello world"}
    assert prompt == "<|user|>\nHello there\n<|assistant|>\n"


def test_llamacpp_native_completion(llamacpp: Sim) -> None:
    with llamacpp.http() as http:
        done = http.post("/completion", json={"prompt": "Once", "n_predict": 4}).json()
        natural = http.post("/completion", json={"prompt": "Once"}).json()
        word = http.post("/completion", json={"prompt": "Once", "stop": [" "]}).json()
        streamed = http.post("/completion", json={"prompt": "Once", "n_predict": 4, "stream": True})
    assert (done["stop"], done["stop_type"], done["tokens_predicted"]) == (True, "limit", 4)
    assert natural["stop_type"] == "eos" and natural["tokens_predicted"] == 24
    assert word["stop_type"] == "word" and word["stopping_word"] == " "
    assert done["timings"]["predicted_n"] == 4
    lines = [json.loads(p) for p in sse_payloads(streamed.text)]
    assert "".join(line["content"] for line in lines) == done["content"]
    assert lines[-1]["stop"] is True and all(not line["stop"] for line in lines[:-1])


def test_llamacpp_metrics(llamacpp: Sim) -> None:
    with llamacpp.http() as http:
        text = http.get("/metrics").text
    for name in ("requests_processing", "requests_deferred", "prompt_tokens_total",
                 "tokens_predicted_total"):  # fmt: skip
        assert f"# TYPE llamacpp:{name} " in text
    assert "mindrouter_sim_requests_total" in text


def test_llamacpp_single_model_ignores_the_model_field() -> None:
    sim = start_sim(SimConfig(engine="llamacpp", models=[SimModel("only-one:2048")]))
    try:
        reply = sim.openai().chat.completions.create(model="whatever", messages=HI)  # type: ignore[arg-type]
        assert reply.choices[0].message.content
        assert sim.last_record().model == "only-one:2048"
        models = list(sim.openai().models.list())
        assert [m.id for m in models] == ["only-one:2048"]
    finally:
        sim.close()

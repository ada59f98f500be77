// The review page: one item at a time; every text is set with textContent (never parsed as markup).
"use strict";
const token = new URLSearchParams(location.search).get("token");
const query = token ? "?token=" + encodeURIComponent(token) : "";
const $ = (id) => document.getElementById(id);
let state = null;
let phase = "loading"; // "deciding" | "shown" | "end"

function show(id, on) { $(id).hidden = !on; }

function fail(message) {
  $("error").textContent = message;
  show("error", true);
}

async function call(path, body) {
  const response = await fetch(path + query, body === undefined ? {} : {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body),
  });
  const data = await response.json();
  if (!response.ok) throw new Error(data.detail || response.statusText);
  return data;
}

function progress() {
  $("progress").max = state.total;
  $("progress").value = state.done;
  $("progress-text").textContent = state.done + " / " + state.total;
}

function choiceText(value) {
  const choice = state.choices.find((c) => c.value === value);
  return choice ? choice.text : value;
}

function render() {
  $("title").textContent = "Review of " + state.run + " by " + state.reviewer;
  progress();
  show("error", false);
  if (!state.item) return end();
  const item = state.item;
  $("question").textContent = item.question;
  $("options").replaceChildren(...item.options.map((o) => {
    const li = document.createElement("li");
    li.textContent = o;
    return li;
  }));
  $("reference").textContent = item.reference;
  show("reference-box", item.reference !== "");
  const pair = state.judge === "pairwise";
  $("response").textContent = item.response;
  $("output-1").textContent = item.output_1;
  $("output-2").textContent = item.output_2;
  show("response-box", !pair);
  show("output-1-box", pair);
  show("output-2-box", pair);
  $("choices").replaceChildren(...state.choices.map((c) => {
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.value = c.value;
    button.textContent = c.text;
    const kbd = document.createElement("kbd");
    kbd.textContent = c.key;
    button.append(kbd);
    button.addEventListener("click", () => decide(c.value));
    return button;
  }));
  $("judge-verdict").textContent = "";
  $("judge-reason").textContent = "";
  show("judge", false);
  show("end", false);
  show("item", true);
  phase = "deciding";
}

function end() {
  show("item", false);
  const e = state.end;
  $("end-own").textContent = "You labelled " + e.labelled + " items; you and the judge agree on " +
    e.with_judge + " of them.";
  $("agreement").textContent = e.line;
  show("end", true);
  phase = "end";
}

async function decide(value) {
  if (phase !== "deciding") return;
  phase = "sending";
  for (const b of $("choices").querySelectorAll("button")) {
    b.disabled = true;
    b.classList.toggle("chosen", b.dataset.value === value);
  }
  try {
    const judged = await call("api/label", {key: state.item.key, label: value});
    state.done += 1;
    progress();
    $("judge-verdict").textContent = choiceText(judged.verdict) + (judged.verdict === value ? " (as you)" : " (not as you)");
    $("judge-reason").textContent = judged.reason;
    show("judge-reason", judged.reason !== "");
    show("judge", true);
    $("next").focus();
    phase = "shown";
  } catch (err) {
    fail(String(err.message || err));
    load();
  }
}

async function load() {
  phase = "loading";
  try {
    state = await call("api/state");
    render();
  } catch (err) {
    fail(String(err.message || err));
  }
}

$("next").addEventListener("click", () => { if (phase === "shown") load(); });
document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  if (phase === "deciding") {
    const choice = state.choices.find((c) => c.key === event.key.toLowerCase());
    if (choice) { event.preventDefault(); decide(choice.value); }
  } else if (phase === "shown" && (event.key === "Enter" || event.key === "n")) {
    event.preventDefault();
    load();
  }
});
load();

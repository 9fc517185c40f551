// extractor review pages: keyboard, field <-> evidence links, list items in the edit form.
// Plain JavaScript served from the package (the Content-Security-Policy forbids inline script).
"use strict";

(function () {
  function typing(event) {
    const t = event.target;
    return event.ctrlKey || event.metaKey || event.altKey ||
      (t && (t.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName)));
  }

  function go(id) {
    const link = document.getElementById(id);
    if (link && link.href) { window.location.href = link.href; return true; }
    return false;
  }

  // -- queue page: j/k move the selection, Enter (or o) opens it ------------------------------------------
  function queueKeys(event) {
    const rows = Array.from(document.querySelectorAll("tr.row"));
    if (!rows.length) return;
    let at = rows.findIndex((r) => r.classList.contains("selected"));
    if (event.key === "j" || event.key === "k") {
      if (at >= 0) rows[at].classList.remove("selected");
      at = event.key === "j" ? Math.min(rows.length - 1, at + 1) : Math.max(0, at - 1);
      rows[at].classList.add("selected");
      rows[at].scrollIntoView({ block: "nearest" });
      event.preventDefault();
    } else if ((event.key === "Enter" || event.key === "o") && at >= 0) {
      window.location.href = rows[at].dataset.href;
      event.preventDefault();
    }
  }

  // -- document page: j/k next/previous, a approve, r reject, e edit ---------------------------------------
  function documentKeys(event) {
    const key = event.key;
    if (key === "j") { if (go("next")) event.preventDefault(); }
    else if (key === "k") { if (go("prev")) event.preventDefault(); }
    else if (key === "e") { if (go("edit")) event.preventDefault(); }
    else if (key === "a") {
      const form = document.getElementById("approve-form");
      if (!form) return;
      event.preventDefault();
      const override = document.getElementById("override");
      if (override && !override.value.trim()) { override.focus(); return; }
      form.requestSubmit();
    } else if (key === "r") {
      const reason = document.getElementById("reason");
      if (!reason) return;
      event.preventDefault();
      if (reason.value.trim()) reason.form.requestSubmit(); else reason.focus();
    }
  }

  // -- evidence: click a field to see its excerpts, click a sentence to light up the fields it backs -------
  function tokens(value) { return (value || "").split(" ").filter(Boolean); }

  function clear(name) {
    document.querySelectorAll("." + name).forEach((el) => el.classList.remove(name));
  }

  function showEvidence(field) {
    const wanted = new Set(tokens(field.dataset.ev));
    const marks = Array.from(document.querySelectorAll("mark.ev"))
      .filter((m) => tokens(m.dataset.ev).some((i) => wanted.has(i)));
    const boxes = Array.from(document.querySelectorAll(".ev-box")).filter((b) => wanted.has(b.dataset.ev));
    clear("flash"); clear("lit");
    field.classList.add("lit");
    marks.forEach((m) => m.classList.add("flash"));
    boxes.forEach((b) => b.classList.add("flash"));  // the excerpt's lines on the page image
    if (boxes.length) boxes[0].scrollIntoView({ block: "center", behavior: "smooth" });
    if (marks.length) marks[0].scrollIntoView({ block: "center", behavior: "smooth" });
  }

  // page images: each evidence box placed from its edges (fractions of the page; no inline style: the CSP)
  function placeBoxes() {
    document.querySelectorAll(".ev-box").forEach((box) => {
      const [x0, top, x1, bottom] = tokens(box.dataset.box).map(Number);
      box.style.left = (100 * x0) + "%";
      box.style.top = (100 * top) + "%";
      box.style.width = (100 * (x1 - x0)) + "%";
      box.style.height = (100 * (bottom - top)) + "%";
    });
  }

  function showFields(sentence) {
    const paths = new Set(tokens(sentence.dataset.fields));
    sentence.querySelectorAll("mark.ev").forEach((m) => tokens(m.dataset.fields).forEach((p) => paths.add(p)));
    clear("lit"); clear("flash");
    sentence.classList.add("flash");
    const lit = [];
    paths.forEach((path) => {
      document.querySelectorAll('.field[data-path="' + CSS.escape(path) + '"]').forEach((f) => {
        f.classList.add("lit");
        lit.push(f);
      });
    });
    if (lit.length) lit[0].scrollIntoView({ block: "nearest", behavior: "smooth" });
  }

  function documentClicks(event) {
    const field = event.target.closest(".field.has-ev");
    if (field) { showEvidence(field); return; }
    const sentence = event.target.closest(".sentence[data-sentence]");
    if (sentence && sentence.closest("#source")) showFields(sentence);
  }

  // -- edit form: add and remove list items ---------------------------------------------------------------
  function editClicks(event) {
    const button = event.target.closest("button");
    if (!button) return;
    if (button.classList.contains("remove")) {
      button.closest("li.item").remove();
    } else if (button.classList.contains("add")) {
      const set = button.closest("fieldset.arr");
      const list = set.querySelector(":scope > ol.items");
      const template = set.querySelector(":scope > template.item-template");
      const next = Number(list.dataset.next || "0");
      // an optional list (or the optional objects around it) the candidate did not have exists from now on
      for (let around = set; around; around = around.parentElement.closest("fieldset")) {
        around.querySelectorAll(':scope > input[type="hidden"][name^="t:"]').forEach((marker) => { marker.disabled = false; });
      }
      list.dataset.next = String(next + 1);
      list.insertAdjacentHTML("beforeend", template.innerHTML.split(set.dataset.placeholder).join(String(next)));
      const first = list.lastElementChild.querySelector("input, textarea, select");
      if (first) first.focus();
    }
  }

  // -- claims: the open page renews this person's hold on the document, and lets it go when left ------------
  function claims() {
    const holder = document.getElementById("claim");
    const csrf = document.querySelector('input[name="csrf"]');
    if (!holder || !csrf) return;
    const form = () => { const f = new FormData(); f.append("csrf", csrf.value); return f; };
    let mine = holder.dataset.held !== "1";
    let until = holder.dataset.until;  // the claim as this page last renewed it
    function renew() {
      fetch(holder.dataset.claim, { method: "POST", body: form(), credentials: "same-origin" })
        .then((r) => r.ok ? r.json() : null)
        .then((answer) => {
          if (!answer) return;
          if (answer.mine && !mine) { window.location.reload(); return; }  // the other person let it go: it is ours now
          mine = answer.mine;
          if (mine) until = answer.claim.token;
          const held = document.getElementById("held");
          if (!mine && held && answer.message) held.textContent = answer.message + ".";
        })
        .catch(() => {});
    }
    window.setInterval(renew, Math.max(1000, Number(holder.dataset.renewMs) || 60000));
    // leaving releases the claim as this page holds it: not one the next page (this document's edit form) renewed
    window.addEventListener("pagehide", () => {
      if (!mine || !navigator.sendBeacon) return;
      const f = form();
      f.append("until", until);
      navigator.sendBeacon(holder.dataset.release, f);
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    const body = document.body;
    if (body.classList.contains("queue-page")) {
      document.addEventListener("keydown", (e) => { if (!typing(e)) queueKeys(e); });
      document.querySelectorAll("tr.row").forEach((row) => row.addEventListener("dblclick", () => {
        window.location.href = row.dataset.href;
      }));
    } else if (body.classList.contains("document-page")) {
      placeBoxes();
      document.addEventListener("keydown", (e) => { if (!typing(e)) documentKeys(e); });
      document.addEventListener("click", documentClicks);
      document.querySelectorAll(".field.has-ev").forEach((f) => f.addEventListener("keydown", (e) => {
        if (e.key === "Enter") { e.stopPropagation(); showEvidence(f); }
      }));
    } else if (body.classList.contains("edit-page")) {
      document.addEventListener("click", editClicks);
    }
    claims();
    body.dataset.ready = "1";
  });
})();

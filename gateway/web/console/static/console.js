// The console works without this file; it only makes a few things nicer:
// asks before a destructive review action, counts characters in the Memory.md editor,
// and opens one review form at a time.
"use strict";

document.addEventListener("click", (event) => {
  const button = event.target.closest("button[data-confirm]");
  if (button && !window.confirm(button.dataset.confirm)) {
    event.preventDefault();
  }
});

function countCharacters(textarea, output) {
  const max = Number(textarea.dataset.max || 0);
  const n = textarea.value.length;
  const over = max && n > max;
  output.textContent = `${n.toLocaleString()} characters now` +
    (over ? `: over the ${max.toLocaleString()} a prompt carries, so the middle will be left out.` : ".");
}

function enhance() {
  const editor = document.getElementById("core-text");
  const count = document.getElementById("core-count");
  if (editor && count && !editor.readOnly) {
    countCharacters(editor, count);
    editor.addEventListener("input", () => countCharacters(editor, count));
  }

  // Opening one review form closes its siblings, and puts the cursor in its field.
  for (const details of document.querySelectorAll(".actions details")) {
    details.addEventListener("toggle", () => {
      if (!details.open) return;
      for (const other of details.parentElement.querySelectorAll("details[open]")) {
        if (other !== details) other.open = false;
      }
      const field = details.querySelector("textarea, input:not([type=hidden])");
      if (field) field.focus();
    });
  }
}

if (document.readyState === "loading") {
  document.addEventListener("DOMContentLoaded", enhance);
} else {
  enhance();
}

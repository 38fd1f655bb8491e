// The copy buttons next to long ids: shown only when JavaScript runs (the pages work without it).
document.addEventListener("DOMContentLoaded", () => {
  document.body.addEventListener("click", (event) => {
    const button = event.target.closest("button.copy");
    if (!button || !navigator.clipboard) return;
    navigator.clipboard.writeText(button.dataset.copy).then(() => { button.textContent = "Copied"; });
  });
  const reveal = (root) => root.querySelectorAll("button.copy[hidden]").forEach((b) => { b.hidden = false; });
  reveal(document);
  document.body.addEventListener("htmx:afterSwap", (event) => reveal(event.target));
});

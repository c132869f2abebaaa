// Training Job list: select rows, delete them after a confirm dialog.
(function () {
  const form = document.getElementById("bulk-delete");
  const boxes = () => Array.from(form.querySelectorAll('input[name="ids"]'));
  const button = document.getElementById("delete-selected");
  const dialog = document.getElementById("confirm-delete");
  const refresh = () => { button.disabled = !boxes().some((b) => b.checked); };
  document.getElementById("select-all").addEventListener("change", (e) => {
    boxes().forEach((b) => { b.checked = e.target.checked; });
    refresh();
  });
  form.addEventListener("change", refresh);
  button.addEventListener("click", () => {
    document.getElementById("delete-count").textContent = boxes().filter((b) => b.checked).length;
    dialog.showModal();
  });
  document.getElementById("cancel-delete").addEventListener("click", () => dialog.close());
  document.getElementById("confirm-delete-button").addEventListener("click", () => form.submit());
})();

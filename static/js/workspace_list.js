// Training Workspace list: select rows (or one row's More menu), cancel the service after a confirm dialog.
(function () {
  const form = document.getElementById("bulk-cancel");
  const boxes = () => Array.from(form.querySelectorAll('input[name="ids"]'));
  const button = document.getElementById("cancel-selected");
  const dialog = document.getElementById("confirm-cancel");
  const refresh = () => { button.disabled = !boxes().some((b) => b.checked); };
  const confirmFor = (names) => {
    document.getElementById("cancel-names").textContent = names.join(", ");
    dialog.showModal();
  };
  document.getElementById("select-all").addEventListener("change", (e) => {
    boxes().forEach((b) => { b.checked = e.target.checked; });
    refresh();
  });
  form.addEventListener("change", refresh);
  button.addEventListener("click", () => confirmFor(boxes().filter((b) => b.checked).map((b) => b.dataset.name)));
  form.querySelectorAll(".cancel-one").forEach((one) => one.addEventListener("click", () => {
    // the More menu cancels exactly this one: select it alone
    boxes().forEach((b) => { b.checked = b.value === one.dataset.id; });
    refresh();
    confirmFor([one.dataset.name]);
  }));
  document.getElementById("cancel-cancel").addEventListener("click", () => dialog.close());
  document.getElementById("confirm-cancel-button").addEventListener("click", () => form.submit());
})();

// Edit a Training Workspace: the new monthly estimate as the node count changes, then confirm.
(function () {
  const form = document.getElementById("resize-form");
  const data = JSON.parse(document.getElementById("estimate-data").textContent);
  const [whole, frac = ""] = data.rate.split(".");
  const rate = parseInt(whole, 10) * 10000 + parseInt((frac + "0000").slice(0, 4), 10); // 1/10,000 $
  const monthly = () => {
    const nodes = parseInt(form.elements.node_count.value, 10) || 0;
    const cents = Math.floor((rate * data.gpus * nodes * data.hours_per_month + 50) / 100);
    return "$" + (cents / 100).toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  };
  const dialog = document.getElementById("confirm-edit");
  form.addEventListener("input", () => { document.getElementById("edit-monthly").textContent = monthly(); });
  const confirmEdit = () => {
    document.getElementById("confirm-nodes").textContent = form.elements.node_count.value;
    document.getElementById("confirm-monthly").textContent = monthly();
    dialog.showModal();
  };
  document.getElementById("edit-button").addEventListener("click", confirmEdit);
  form.addEventListener("submit", (e) => { if (!dialog.open) { e.preventDefault(); confirmEdit(); } });
  document.getElementById("cancel-edit").addEventListener("click", () => dialog.close());
})();

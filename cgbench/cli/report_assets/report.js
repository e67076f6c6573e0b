// cgbench report: click a column header to sort its table (numbers by value, text alphabetically;
// a second click reverses). Cells carry their numeric value in data-v.
(function () {
  "use strict";
  function key(row, col) {
    var c = row.cells[col];
    if (!c) { return { num: null, text: "" }; }
    var v = c.getAttribute("data-v");
    return { num: v === null || v === "" ? null : parseFloat(v), text: c.textContent };
  }
  function compare(a, b) {
    if (a.num !== null && b.num !== null) { return a.num - b.num; }
    if (a.num !== null) { return -1; }
    if (b.num !== null) { return 1; }
    return a.text.localeCompare(b.text, undefined, { numeric: true });
  }
  function sortBy(table, th, col) {
    var body = table.tBodies[0];
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r1, r2) {
      var d = compare(key(r1, col), key(r2, col));
      return ascending ? d : -d;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th, col) {
      th.addEventListener("click", function () { sortBy(table, th, col); });
    });
  });
}());

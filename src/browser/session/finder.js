// The candidates of an interactive view, found by the page in boxd's own isolated world (the page's
// scripts can neither see nor change what runs here). It reads, in the order of Chromium's DOM
// snapshot (the flat tree: a host's shadow tree, the elements slotted where their slot is), what
// `snapshot::clickable` and `snapshot::candidates` read from that snapshot. The walk goes only as far
// as asked: it stops once it has `want` candidates, waits in this world (`globalThis.__boxdFinder`,
// under the finding's `id`), and goes on when its `walk(want)` is called. Arguments: the finding's
// id, how many candidates to find first, the root element (or null), the viewport ([x, y, width,
// height] in the document's CSS pixels, or null), the interactive roles, then the elements with a
// click, mouse button or DOMActivate listener. Each step returns the candidates found so far, a
// letter per candidate for its looks (`p`: a pointer starts on it; `h`: a click handler, a link, an
// enabled button or a tabindex; `-`: neither), whether the walk is done, and the number of elements
// walked that may host a closed shadow root.
function (id, want, root, viewport, interactive, ...clicked) {
  const roles = new Set(interactive);
  const clicks = new Set(clicked);
  const found = [];
  const suspects = [];
  let looks = '';
  const designMode = document.designMode === 'on';
  const scrollX = window.scrollX;
  const scrollY = window.scrollY;
  const range = document.createRange();
  const sized = (rects) => {
    for (let i = 0; i < rects.length; i++) {
      if (rects[i].width > 0 && rects[i].height > 0) return true;
    }
    return false;
  };
  const meets = (rects) => {
    const [left, top, width, height] = viewport;
    for (let i = 0; i < rects.length; i++) {
      const rect = rects[i];
      const x = rect.left + scrollX;
      const y = rect.top + scrollY;
      if (x <= left + width && y <= top + height && x + rect.width >= left && y + rect.height >= top) {
        return true;
      }
    }
    return false;
  };
  const mainSummary = (summary) => {
    const details = summary.parentElement;
    return details !== null && details.localName === 'details' &&
      details.querySelector(':scope > summary') === summary;
  };
  const labels = (label) => {
    const control = label.control;
    return control !== null && (control.localName === 'input' || clicks.has(control)) &&
      !control.matches(':disabled');
  };
  // `aria-hidden="true"` or `inert`: hidden with everything in it.
  const hides = (element) => {
    const ariaHidden = element.getAttribute('aria-hidden');
    return (ariaHidden !== null && ariaHidden.toLowerCase() === 'true') || element.hasAttribute('inert');
  };
  const tabbable = (value) => {
    const trimmed = value.trim();
    return /^\+?[0-9]{1,18}$/.test(trimmed) || /^-0{1,18}$/.test(trimmed);
  };
  // Whether anything in `element` shows (an element or text of some size, or generated content):
  // asked only of a candidate whose own box has no size. Past `budget` nodes it is assumed.
  const shows = (element) => {
    const stack = [element];
    let budget = 10000;
    while (stack.length > 0) {
      if (--budget < 0) return true;
      const node = stack.pop();
      if (node.nodeType === 3) {
        range.selectNodeContents(node);
        if (sized(range.getClientRects())) return true;
        continue;
      }
      if (node !== element && node.nodeType === 1 && sized(node.getClientRects())) return true;
      if (node.nodeType === 1) {
        for (const pseudo of ['::before', '::after', '::marker']) {
          const content = getComputedStyle(node, pseudo).content;
          if (content && content !== 'none' && content !== 'normal') return true;
        }
        if (node.shadowRoot) stack.push(node.shadowRoot);
      }
      for (let child = node.firstChild; child; child = child.nextSibling) stack.push(child);
    }
    return false;
  };
  const visit = (element, parentCursor, hidden, inside, editable) => {
    const attributes = element.hasAttributes();
    let hiddenHere = hidden;
    let editableHere = editable;
    let role = null;
    let contentEditable = null;
    let tabindex = null;
    if (attributes) {
      if (!hidden) hiddenHere = hides(element);
      role = element.getAttribute('role');
      contentEditable = element.getAttribute('contenteditable');
      tabindex = element.getAttribute('tabindex');
      editableHere = editable || contentEditable !== null;
    }
    const insideHere = inside || element === root;
    const box = element.checkVisibility();
    const cursor = box ? getComputedStyle(element).cursor : '';
    if (box && !hiddenHere && insideHere) {
      const name = element.nodeName.toUpperCase();
      let byMarkup = false;
      let linked = false;
      if (name === 'A' || name === 'AREA') {
        byMarkup = attributes && element.hasAttribute('href');
        linked = byMarkup || (attributes && element.hasAttribute('xlink:href'));
      } else if (name === 'BUTTON' || name === 'SELECT' || name === 'TEXTAREA' || name === 'SUMMARY') {
        byMarkup = true;
      } else if (name === 'INPUT') {
        const type = attributes ? element.getAttribute('type') : null;
        byMarkup = type === null || type.toLowerCase() !== 'hidden';
      }
      const first = role === null ? '' : role.trim().split(/\s+/)[0];
      const byRole = first !== '' && roles.has(first);
      const byEditing = contentEditable !== null && contentEditable.toLowerCase() !== 'false';
      const origin = cursor === 'pointer' && parentCursor !== 'pointer';
      // Chromium's `WillRespondToMouseClickEvents`: a listener or editing, or an element that
      // answers clicks by itself (a link, an enabled input, a details' summary, the label of one).
      const handled = clicks.has(element) || linked || name === 'INPUT' ||
        (name === 'SUMMARY' && mainSummary(element)) || (name === 'LABEL' && labels(element)) ||
        ((designMode || editableHere) && element.isContentEditable);
      const tabbed = tabindex !== null && tabbable(tabindex);
      if (byMarkup || byRole || byEditing || origin || handled || tabbed) {
        const rects = element.getClientRects();
        const ownSized = sized(rects);
        if ((viewport === null || meets(rects)) && (ownSized || shows(element))) {
          let look = '-';
          if (ownSized && name !== 'HTML' && name !== 'BODY') {
            if (origin) {
              look = 'p';
            } else if ((handled && !element.matches(':disabled')) || tabbed) {
              look = 'h';
            }
          }
          if (byMarkup || byRole || byEditing || look !== '-') {
            found.push(element);
            looks += look;
          }
        }
      }
    }
    // The children of the flat tree (the snapshot's): a host's are its shadow tree's, a slot's
    // the elements assigned to it (or its own when none is). They go on the stack last first.
    const shadow = element.shadowRoot;
    if (shadow === null && element.localName.includes('-')) suspects.push(element);
    const assigned = element.localName === 'slot' ? element.assignedElements() : [];
    if (assigned.length > 0) {
      for (let at = assigned.length - 1; at >= 0; at--) {
        stack.push([assigned[at], cursor, hiddenHere, insideHere, editableHere]);
      }
      return;
    }
    const parent = shadow || element;
    for (let child = parent.lastElementChild; child; child = child.previousElementSibling) {
      stack.push([child, cursor, hiddenHere, insideHere, editableHere]);
    }
  };
  const stack = [];
  if (root !== null) {
    // The walk starts at the root, with what its ancestors in the flat tree pass down.
    const up = (node) => node.assignedSlot ||
      (node.parentNode instanceof ShadowRoot ? node.parentNode.host : node.parentNode);
    let hidden = false;
    for (let above = up(root); above && above.nodeType === 1 && !hidden; above = up(above)) {
      hidden = hides(above);
    }
    const parent = up(root);
    const parentCursor = parent && parent.nodeType === 1 && parent.checkVisibility()
      ? getComputedStyle(parent).cursor : '';
    stack.push([root, parentCursor, hidden, true, true]);
  } else if (document.documentElement) {
    stack.push([document.documentElement, '', false, true, false]);
  }
  const more = (wanted) => {
    while (found.length < wanted && stack.length > 0) {
      const [element, parentCursor, hidden, inside, editable] = stack.pop();
      visit(element, parentCursor, hidden, inside, editable);
    }
    const from = more.reported;
    more.reported = found.length;
    return {
      looks: looks.slice(from),
      done: stack.length === 0,
      suspects: suspects.length,
    };
  };
  more.reported = 0;
  globalThis.__boxdFinder = {id, found, suspects, walk: more};
  return more(want);
}

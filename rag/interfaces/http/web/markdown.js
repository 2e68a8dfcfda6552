// A tiny Markdown renderer for answers: paragraphs, `code`, code fences, lists, web links.
// Raw HTML is never parsed: every piece of text becomes a text node or textContent.
"use strict";

/** A new element holding `text` as plain text. */
function mdNode(tag, text) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  return node;
}

/** Inline Markdown: `code` spans, [links](https://...), **strong** and *emphasis* (or
 * _emphasis_, never inside a snake_case word); the rest stays plain text. */
function inlineNodes(text) {
  const nodes = [];
  const pattern = /`([^`\n]+)`|\[([^\]\n]+)\]\(([^)\s]+)\)|\*\*([^*\s](?:[^*\n]*[^*\s])?)\*\*|(?<![\w*])\*([^*\s](?:[^*\n]*[^*\s])?)\*(?![\w*])|(?<!\w)_([^_\s](?:[^_\n]*[^_\s])?)_(?!\w)/g;
  let last = 0;
  let match;
  while ((match = pattern.exec(text)) !== null) {
    if (match.index > last) nodes.push(document.createTextNode(text.slice(last, match.index)));
    if (match[1] !== undefined) {
      nodes.push(mdNode("code", match[1]));
    } else if (match[4] !== undefined || match[5] !== undefined || match[6] !== undefined) {
      const node = mdNode(match[4] !== undefined ? "strong" : "em");
      node.append(...inlineNodes(match[4] ?? match[5] ?? match[6]));
      nodes.push(node);
    } else if (/^https?:\/\//i.test(match[3])) {  // no javascript: or data: links
      const link = mdNode("a", match[2]);
      link.href = match[3];
      link.rel = "noopener noreferrer";
      link.target = "_blank";
      nodes.push(link);
    } else {
      nodes.push(document.createTextNode(match[2]));  // a path inside the docs: its words
    }
    last = pattern.lastIndex;
  }
  if (last < text.length) nodes.push(document.createTextNode(text.slice(last)));
  return nodes;
}

const FENCE = /^\s*(`{3,}|~{3,})\s*([\w+.-]*)/;
const ITEM = /^\s*(?:[-*+]|(\d+)[.)])\s+(.*)$/;

/** Markdown blocks (paragraphs, code fences, lists) as DOM nodes. Raw HTML is never
 * parsed: every piece of text goes in through textContent or a text node. */
function markdownNodes(text) {
  const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
  const blocks = [];
  let i = 0;
  while (i < lines.length) {
    const fence = lines[i].match(FENCE);
    if (fence) {
      const body = [];
      for (i += 1; i < lines.length && !lines[i].trim().startsWith(fence[1]); i += 1) {
        body.push(lines[i]);
      }
      i += 1;  // the closing fence (or the end)
      const code = mdNode("code", body.join("\n"));
      if (fence[2]) code.dataset.lang = fence[2];
      const pre = mdNode("pre");
      pre.append(code);
      blocks.push(pre);
      continue;
    }
    let item = lines[i].match(ITEM);
    if (item) {
      const list = mdNode(item[1] ? "ol" : "ul");
      for (; i < lines.length && (item = lines[i].match(ITEM)); i += 1) {
        const entry = mdNode("li");
        entry.append(...inlineNodes(item[2]));
        list.append(entry);
      }
      blocks.push(list);
      continue;
    }
    const rows = [];  // an answer breaks a line where the docs did: each row stays a line
    for (; i < lines.length && lines[i].trim() && !FENCE.test(lines[i]) && !ITEM.test(lines[i]);
      i += 1) {
      rows.push(lines[i].trim());
    }
    if (rows.length) {
      const para = mdNode("p");
      rows.forEach((row, n) => {
        if (n) para.append(document.createElement("br"));
        para.append(...inlineNodes(row));
      });
      blocks.push(para);
    } else {
      i += 1;  // a blank line
    }
  }
  return blocks;
}

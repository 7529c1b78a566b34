-- Headless Neovim (0.7+) against fusionlens-lsp: open a file, compile one target through
-- workspace/executeCommand, then ask for code lenses, inlay hints and hover with raw
-- requests (0.7 has no inlay-hint client). Results go to $FL_OUT as JSON.
--
--   FL_REPO=/path/to/repo FL_FILE=examples/mlp.py FL_TARGET=mlp_example FL_OUT=/tmp/out.json \
--     nvim --headless --clean -c "luafile tests/editors/nvim_smoke.lua"
--
-- FL_PYTHON (default: python3) runs the server; FL_HOVER_TEXT picks the hovered line by its text.

local repo = assert(os.getenv("FL_REPO"), "FL_REPO not set")
local file = assert(os.getenv("FL_FILE"), "FL_FILE not set")
local target = os.getenv("FL_TARGET")
local out_path = assert(os.getenv("FL_OUT"), "FL_OUT not set")
local python = os.getenv("FL_PYTHON") or "python3"
local hover_text = os.getenv("FL_HOVER_TEXT")
local result = { steps = {} }

local function finish(code)
  local f = io.open(out_path, "w")
  f:write(vim.fn.json_encode(result))
  f:close()
  vim.cmd((code == 0) and "qa!" or "cquit! " .. code)
end

local function step(name, value)
  table.insert(result.steps, name)
  result[name] = value
end

local ok, err = pcall(function()
  vim.lsp.set_log_level("ERROR")
  vim.cmd("edit " .. vim.fn.fnameescape(repo .. "/" .. file))
  local bufnr = vim.api.nvim_get_current_buf()
  local uri = vim.uri_from_bufnr(bufnr)
  local client_id = vim.lsp.start_client({
    name = "fusionlens",
    cmd = { python, "-P", "-m", "lsp_server", "--stdio" },
    cmd_cwd = repo,
    cmd_env = { PYTHONPATH = os.getenv("FL_PYTHONPATH") or repo },
    root_dir = repo,
    init_options = { compileTrigger = "manual", benchmarkRepeats = 2 },
  })
  assert(client_id, "start_client failed")
  vim.lsp.buf_attach_client(bufnr, client_id)
  local client = vim.lsp.get_client_by_id(client_id)
  assert(vim.wait(20000, function() return client.initialized end, 50), "server did not initialize")
  step("initialized", true)

  local function request(method, params, timeout)
    local resp, e = client.request_sync(method, params, timeout or 10000, bufnr)
    assert(resp, method .. ": " .. tostring(e))
    assert(not resp.err, method .. ": " .. vim.inspect(resp.err))
    return resp.result
  end

  local lenses = request("textDocument/codeLens", { textDocument = { uri = uri } })
  step("lenses_before", vim.tbl_map(function(l) return l.command.title end, lenses or {}))

  local compiled = request("workspace/executeCommand",
    { command = "fusionlens.compile", arguments = { uri, target or vim.NIL, { wait = true } } }, 600000)
  step("compile", compiled)

  lenses = request("textDocument/codeLens", { textDocument = { uri = uri } })
  step("lenses_after", vim.tbl_map(function(l) return l.command.title end, lenses or {}))

  local n = vim.api.nvim_buf_line_count(bufnr)
  local hints = request("textDocument/inlayHint", {
    textDocument = { uri = uri },
    range = { start = { line = 0, character = 0 }, ["end"] = { line = n, character = 0 } },
  })
  step("hints", vim.tbl_map(function(h)
    return { line = h.position.line, character = h.position.character, label = h.label }
  end, hints or {}))

  local hover_line = hints and hints[1] and hints[1].position.line or 0
  if hover_text then
    for i, l in ipairs(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)) do
      if l:find(hover_text, 1, true) then hover_line = i - 1 break end
    end
  end
  local hover = request("textDocument/hover",
    { textDocument = { uri = uri }, position = { line = hover_line, character = 4 } })
  step("hover", { line = hover_line, value = hover and hover.contents and hover.contents.value or vim.NIL })

  local actions = request("textDocument/codeAction", {
    textDocument = { uri = uri },
    range = { start = { line = hover_line, character = 0 }, ["end"] = { line = hover_line, character = 0 } },
    context = { diagnostics = {} },
  })
  step("actions", vim.tbl_map(function(a) return a.title end, actions or {}))

  local regions = request("fusionlens/regions", { uri = uri })
  step("regions", regions)
  client.stop()
  vim.wait(5000, function() return client.is_stopped() end, 50)
end)

if not ok then
  result.error = tostring(err)
  finish(1)
else
  finish(0)
end

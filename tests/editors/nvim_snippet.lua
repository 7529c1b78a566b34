-- The Neovim 0.7 snippet of docs/lsp.md, run as a user's init would: read from the page,
-- the server command replaced by FL_PYTHON -m lsp_server; then two Python files are opened
-- and must share one client rooted at the folder holding pyproject.toml. Results go to
-- $FL_OUT as JSON (run by tests/lsp/test_edits.py).
--
--   FL_REPO=/path/to/repo FL_FILE1=a.py FL_FILE2=b.py FL_OUT=/tmp/out.json \
--     nvim --headless --clean -c "luafile tests/editors/nvim_snippet.lua"

local repo = assert(os.getenv("FL_REPO"), "FL_REPO not set")
local out_path = assert(os.getenv("FL_OUT"), "FL_OUT not set")
local python = os.getenv("FL_PYTHON") or "python3"
local result = {}

local function finish(code)
  local f = io.open(out_path, "w")
  f:write(vim.fn.json_encode(result))
  f:close()
  vim.cmd((code == 0) and "qa!" or "cquit! " .. code)
end

local ok, err = pcall(function()
  vim.lsp.set_log_level("ERROR")
  local page = table.concat(vim.fn.readfile(repo .. "/docs/lsp.md"), "\n")
  local snippet = assert(page:match("```lua\n(%-%- Neovim 0%.7%+\n.-)\n```"), "no Neovim 0.7+ snippet in docs/lsp.md")
  local command = string.format("cmd = { %q, \"-P\", \"-m\", \"lsp_server\", \"--stdio\" }", python)
  local replaced, n = snippet:gsub('cmd = { "fusionlens%-lsp" }', function() return command end)
  assert(n == 1, "the snippet's cmd was not found")
  assert(loadstring(replaced, "docs/lsp.md snippet"))()

  local buffers = {}
  for _, name in ipairs({ "FL_FILE1", "FL_FILE2" }) do
    local file = os.getenv(name)
    assert(file, name .. " not set")
    vim.cmd("edit " .. vim.fn.fnameescape(file))
    table.insert(buffers, vim.api.nvim_get_current_buf())
  end
  local function clients(buf)
    local ids = {}
    for id, _ in pairs(vim.lsp.buf_get_clients(buf)) do table.insert(ids, id) end
    return ids
  end
  assert(vim.wait(20000, function()
    local c = clients(buffers[2])[1] and vim.lsp.get_client_by_id(clients(buffers[2])[1])
    return c ~= nil and c.initialized
  end, 50), "no initialized client attached")
  result.clients = { clients(buffers[1]), clients(buffers[2]) }
  local client = vim.lsp.get_client_by_id(result.clients[2][1])
  result.name = client.name
  result.root = client.config.root_dir
  local resp, e = client.request_sync("textDocument/codeLens",
    { textDocument = { uri = vim.uri_from_bufnr(buffers[2]) } }, 10000, buffers[2])
  assert(resp and not resp.err, "codeLens: " .. tostring(e) .. vim.inspect(resp and resp.err))
  result.lenses = vim.tbl_map(function(l) return l.command.title end, resp.result or {})
  client.stop()
  vim.wait(5000, function() return client.is_stopped() end, 50)
end)

if not ok then
  result.error = tostring(err)
  finish(1)
else
  finish(0)
end

from lsp_server.server import main

if __name__ == "__main__":
    main()

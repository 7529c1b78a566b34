from lsp_server.app import main

if __name__ == "__main__":
    main()

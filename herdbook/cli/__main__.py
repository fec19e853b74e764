from herdbook.cli.main import main

main()
